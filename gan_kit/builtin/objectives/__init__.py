"""Built-in objectives: adversarial losses, D penalties and update strategies."""
