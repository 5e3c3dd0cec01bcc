"""The web dashboard (``rara ui``): server-rendered pages over a read-only pool, live views by
server-sent events from one shared LISTEN connection, cancel/retry behind auth and CSRF."""
