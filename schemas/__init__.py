"""The HTTP contract of the roofline service: request and response models, with OpenAPI examples.

Nothing here imports the service; the routes translate between these models and the core.
"""
