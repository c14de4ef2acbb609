"""``rally serve``: the leaderboard server (optional ``server`` extra; ``docs/server.md``).

- :mod:`rally_env.server.store`: the storage layer (SQLite or PostgreSQL), sharing the local
  leaderboard's tables;
- :mod:`rally_env.server.pool`: the verifier, a bounded pool of worker processes
  (:mod:`rally_env.replay.workers`; the run page's trace: :mod:`rally_env.replay.trace`);
- :mod:`rally_env.server.app`: the HTTP API and the web pages (FastAPI on uvicorn);
- :mod:`rally_env.server.cli`: the ``rally serve`` command.

Only ``app`` and ``cli``'s serving needs the extra (FastAPI, uvicorn, Jinja2; psycopg for
PostgreSQL); the store works with the standard library on SQLite.
"""
