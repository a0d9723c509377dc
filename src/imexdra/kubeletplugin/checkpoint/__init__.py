"""The prepared-claims checkpoint: its upstream-compatible model and its store on disk."""
