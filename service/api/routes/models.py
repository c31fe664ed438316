"""The model catalog: reads open, writes authenticated."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from schemas.models import ModelCreate, ModelPublic, ModelSummary
from service.api.deps import CatalogDep, ModelPath, SessionDep, WriterDep
from service.api.responses import CONFLICT, INVALID, NOT_FOUND, UNAUTHORIZED
from service.core.errors import CostModelError
from service.persistence import repository
from service.translation.models.analyses import (
    architecture_of,
    catalog_model,
    model_public,
    model_summary,
    unprocessable,
)

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", summary="List models", operation_id="list_models",
            description="Every catalog model with its family and parameter counts (total, and active per token).")
def list_models(catalog: CatalogDep, session: SessionDep) -> list[ModelSummary]:
    return [model_summary(*catalog_model(catalog, row.id)) for row in repository.list_models(session)]


@router.get("/{model_id}", summary="Get a model", operation_id="get_model", responses=NOT_FOUND,
            description="The config, the layer kinds, parameter counts and the KV bytes per token in bf16.")
def get_model(model_id: ModelPath, catalog: CatalogDep) -> ModelPublic:
    row, arch = catalog_model(catalog, model_id)
    return model_public(row, arch)


@router.post("", status_code=status.HTTP_201_CREATED, summary="Add a model", operation_id="create_model",
             responses={**UNAUTHORIZED, **CONFLICT, **INVALID},
             description="Adds a model from a Hugging Face config.json (or the generic schema). A config the service "
                         "cannot interpret is refused with the missing or unsupported fields named.")
def create_model(body: ModelCreate, session: SessionDep, _writer: WriterDep) -> ModelPublic:
    try:
        arch = architecture_of(body.config, "config")
    except CostModelError as exc:
        raise unprocessable(exc, "body.config") from None
    row = repository.create_model(session, model_id=body.id, name=body.name or body.id, family=arch.family,
                                  config=body.config, source=body.source)
    return model_public(row, arch)


@router.delete("/{model_id}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a model",
               operation_id="delete_model", responses={**UNAUTHORIZED, **NOT_FOUND},
               description="Removes a model from the catalog; analyses naming it then answer 404.")
def delete_model(model_id: ModelPath, session: SessionDep, _writer: WriterDep) -> Response:
    repository.delete_model(session, model_id=model_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
