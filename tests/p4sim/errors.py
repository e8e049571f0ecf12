"""What the interpreter raises."""


class P4SimError(Exception):
    """The program uses something this interpreter does not implement."""


class ParserError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
