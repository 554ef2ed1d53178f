"""Pure decisions about a node: GPU catalogue and facts, driver plan, inventory contract, packages."""
