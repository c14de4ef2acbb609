"""``rally serve``: the leaderboard server: ``store``, ``pool`` (the verifier), ``app`` (API and
pages) and ``cli`` (``docs/server.md``, "The package"; serving needs the ``server`` extra)."""
