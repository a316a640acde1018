"""Serving (DESIGN §9): the Feast repository rendered from settings, its atomic registry, lookups.

May import the infrastructure floor and the domain packages below it.
"""
