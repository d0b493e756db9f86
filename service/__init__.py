"""lmve.service: the HTTP face (FastAPI). ``create_app(settings)`` builds it."""
