"""The rara roles a login can be given (db/baseline.sql), for the attack suite's logins."""

ROLES = ("rara_reader", "rara_worker", "rara_client", "rara_operator")
