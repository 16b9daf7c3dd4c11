"""Router modules of the REST API, one per resource."""
