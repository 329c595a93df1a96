"""Jinja2 templates of the generated C, shipped inside the package."""
