"""The performance model: cost models (fitted or roofline), the simulator, profile and validate. No torch."""
