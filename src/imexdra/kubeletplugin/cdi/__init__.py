"""CDI for IMEX claims: the specs as data and their files under the CDI root."""
