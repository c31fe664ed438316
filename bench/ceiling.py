"""The ceiling: a bare FastAPI app whose one async route returns a constant."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/")
async def constant() -> dict[str, str]:
    return {"status": "ok"}
