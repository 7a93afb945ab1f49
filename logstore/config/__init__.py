"""Topic and manager configuration (Kafka's names and defaults), topic-name rules and
persisted topic config overrides.

May import: ``errors``, ``storage``, ``util``, ``records`` (the order
``tests/test_layering.py`` checks; its ``ALLOWED_UPWARD`` names the exceptions).
"""
