from corral.cli.main import app

app(prog_name="corral")
