"""Memory operations on the socket (the ``memory.*`` ops): files edited by hand, notes
remembered and lines forgotten, history (blame, why, diff, log) and reflections
held for review.
"""
