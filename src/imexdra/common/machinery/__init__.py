"""client-go's controller machinery: informer, store, work queue, rate limits, leader election, events."""
