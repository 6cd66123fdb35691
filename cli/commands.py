"""Imports every command module so that each registers its commands on `cli.main.app`."""

from cli import bridge as bridge
from cli import console as console
from cli import dryrun as dryrun
from cli import equipment as equipment
from cli import explain as explain
from cli import job as job
from cli import mcp as mcp
from cli import render as render
from cli import run as run
from cli import schema as schema
from cli import serve as serve
from cli import validate as validate
from cli import work as work
