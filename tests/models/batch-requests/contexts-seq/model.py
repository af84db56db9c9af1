"""A stateful sequence model's batched predict whose Context parameter says what it gets: the
list of the batch's Contexts, one per request, in the batch's order. Each answer is the running
total of its own request's sequence, kept in that sequence's Context."""

from podium import Context


class Model:
    def predict(self, batch: list[dict], contexts: list[Context]) -> list[dict]:
        answers = []
        for inputs, context in zip(batch, contexts, strict=True):
            total = context.state.get("total", 0) + inputs["add"]
            context.state["total"] = total
            answers.append(
                {
                    "sequence": context.sequence_id,
                    "total": total,
                    "first": context.first,
                    "batch": len(contexts),
                }
            )
        return answers
