"""client-go's controller machinery: informer, store, work queue, leader election, Events."""
