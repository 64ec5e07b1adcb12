"""The start-up baseline: a minimal typer app with one command that does nothing."""

import typer

app = typer.Typer(add_completion=False)


@app.command()
def noop(name: str, text: list[str] = typer.Argument(None)) -> None:
    """Do nothing."""


@app.callback()
def main() -> None:
    pass


if __name__ == "__main__":
    app()
