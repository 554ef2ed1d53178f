"""Pure decisions about a seat: recipe, compatibility rules, fit, launch rendering and the plan."""
