"""SRv6 provisioning: validated models, netlink translation, kernel feature checks."""
