"""Framework integrations, each an optional extra (``pip install 'memstream[langchain]'``)."""
