"""Questions asked of the engine and the factory: economics, plans, sweeps, the question
commands, sensitivity and validation against published figures. No click here."""
