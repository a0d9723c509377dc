"""The cluster-wide ComputeDomain controller."""
