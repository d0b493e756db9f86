"""``GET /models``: every model of the repository, its state, its bundle and, when it does not serve, why."""

from fastapi import APIRouter

from service.deps import Repository
from service.repository import ModelRepository
from service.schemas import ModelsResponse, ModelStatus
from service.store import ModelStore

router = APIRouter(tags=["model"])


def status(store: ModelStore, default: bool) -> ModelStatus:
    """One model's line of ``GET /models``."""
    cur = store.current
    path = cur.path if cur is not None else store.path
    common = {"name": store.name, "state": store.state, "default": default, "reason": store.reason,
              "path": None if path is None else str(path), "published_refused": store.refused_publish}
    if cur is None:
        return ModelStatus(bundle_id=None, **common)
    model = cur.model
    return ModelStatus(bundle_id=cur.version, d=model.n_features, n=model.n_targets,
                       primary_method=model.primary_method, coverage=model.coverage, loaded_at=cur.loaded_at, **common)


def listing(repository: ModelRepository) -> ModelsResponse:
    default = repository.default
    return ModelsResponse(models=[status(s, s is default) for _, s in sorted(repository.stores.items())],
                          default=None if default is None else default.name, ready=repository.ready,
                          repository=None if repository.root is None else str(repository.root))


@router.get("/models", response_model=ModelsResponse,
            summary="Every model: name, state (READY, UNAVAILABLE, UNLOADED), bundle id, dims, primary method, "
                    "and the reason when it does not serve")
async def models(repository: Repository):
    return listing(repository)
