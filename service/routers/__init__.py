"""The REST endpoints: one router per resource, each a thin adapter over :class:`service.dataplane.DataPlane`;
no router imports another. :func:`hot_table` gathers the hot routes they declare (:mod:`service.routing`)."""


def hot_table() -> list:
    """Every hot route (:class:`service.routing.HotRoute`): the region routes', then the V2 ``infer`` routes'."""
    from service.routers import regions, v2

    return [*regions.HOT, *v2.HOT]
