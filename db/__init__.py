"""``rara.sql``: the SQL of this folder as package data (baseline.sql, migrations/, retired/,
functions/, queries/).

No Python lives here. The file makes the folder a regular package because importlib.resources
cannot read a namespace package that an editable install serves through its import hook.
"""
