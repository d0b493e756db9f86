"""One router per resource: health, regions, model metadata, admin."""
