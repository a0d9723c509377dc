"""Pacing: when the next attempt happens — backoff, token buckets, and waking a waiter on a change."""
