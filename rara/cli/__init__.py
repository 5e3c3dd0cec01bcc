"""The `rara` command line: a thin layer over rara.client and the services."""
