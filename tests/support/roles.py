"""The rara roles a login can be given (db/migrations), for the attack suite's logins."""

ROLES = ("rara_reader", "rara_worker", "rara_client", "rara_operator")
