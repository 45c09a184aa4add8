"""srv6pm_twamp: STAMP / TWAMP-Light probe protocol library, sender, reflector, loss and delay arithmetic."""
