"""Wire formats: one module per message family, each encoding and decoding from one layout."""
