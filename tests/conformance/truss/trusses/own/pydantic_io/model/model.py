from pydantic import BaseModel, Field


class Query(BaseModel):
    text: str
    times: int = Field(default=1, ge=1, le=5)


class Answer(BaseModel):
    text: str
    length: int


class Model:
    def predict(self, query: Query) -> Answer:
        text = query.text * query.times
        return Answer(text=text, length=len(text))
