from okc.cli import app

app(prog_name="okc")
