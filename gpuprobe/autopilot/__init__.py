"""The autopilot: on a loop, read what a live server recorded, forecast the next interval,
recommend for it, and switch the server's layout through its admin API when the policy allows
(policy.py: min-gain, min-dwell, cooldown, one retry). Every decision goes to the store's
`decisions` table with what it predicted, and the next interval's measurements are filled in
afterwards (outcome.py). One autopilot per target, by a lock in the store.
"""
