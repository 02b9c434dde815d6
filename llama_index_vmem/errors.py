"""The one exception type users catch for bad input."""


class VMemInputError(ValueError):
    """Bad input: names the offending item; the memory is left exactly as before the call."""

    def __init__(self, item: str, problem: str) -> None:
        self.item = item
        self.problem = problem
        super().__init__(f"{item}: {problem}")
