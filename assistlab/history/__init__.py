"""The history of comparisons: a SQLite or PostgreSQL store, its queries and the leaderboard."""

from .store import *  # noqa: F401,F403  (split below in a later commit)
