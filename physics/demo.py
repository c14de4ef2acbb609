"""A short scripted drive of the default rover that prints what happened.

Run with ``rally demo`` (or ``python3 -m physics.demo``): launch, top speed, braking from
100 km/h, a handbrake turn and a skidpad circle on flat Mars ground, with the figures the seed
model predicts beside the measured ones.
"""

from __future__ import annotations

import time

import numpy as np

from physics import ROVER, VehicleBatch, flat_terrain


def run_demo(quick: bool = False) -> dict[str, float]:
    """Run the scripted drive, print a summary and return the figures."""
    t0 = time.perf_counter()
    sim = VehicleBatch(1, ROVER, [flat_terrain(size_m=6000.0)])
    p = ROVER
    sim.step_seconds(1.0)
    print("rally-env physics demo: the seed game's 3000 kg Mars rover, 480 Hz, 4 wheels")
    print(
        f"  g = {p.gravity_mps2} m/s^2, mu = {p.mu_base}, static load per wheel "
        f"{sim.wheel_loads_n[0, 0]:.0f} N (LOAD_REF {p.load_ref_n:.0f} N)"
    )
    figures: dict[str, float] = {}

    # launch: time to 100 km/h
    sim.set_commands(np.array([0.0, 1.0, 0.0, 0.0]))
    t100 = None
    while sim.time_s[0] < 60.0:
        sim.step(8)
        if t100 is None and sim.speed_mps[0] >= 100 / 3.6:
            t100 = sim.time_s[0] - 1.0
            loads = sim.wheel_loads_n[0].copy()
            if quick:
                break
    figures["t_0_100_s"] = float(t100)
    print(
        f"  full throttle: 0-100 km/h in {t100:.2f} s; wheel loads under power "
        f"F {loads[0]:.0f} N / R {loads[2]:.0f} N (load transfer from the springs)"
    )
    if not quick:
        figures["top_speed_kmh"] = float(sim.speed_mps[0] * 3.6)
        print(f"  top speed after 60 s: {figures['top_speed_kmh']:.1f} km/h")

    # braking from 100 km/h
    sim.reset(np.array([0.0, 0.0, 0.0, 100 / 3.6]))
    sim.step(1)
    x0 = sim.position_m[0, 0]
    sim.set_commands(np.array([0.0, 0.0, 1.0, 0.0]))
    while sim.speed_mps[0] > 0.05:
        sim.step(1)
    figures["brake_100_m"] = float(sim.position_m[0, 0] - x0)
    print(
        f"  ABS braking from 100 km/h: stopped in {figures['brake_100_m']:.1f} m "
        f"(seed: about 165 m)"
    )

    # handbrake turn at 60 km/h
    sim.reset(np.array([0.0, 0.0, 0.0, 60 / 3.6]))
    sim.set_commands(np.array([1.0, 0.0, 0.0, 1.0]))
    sim.step_seconds(1.5)
    q = sim.quaternion[0]
    yaw = 2.0 * np.arctan2(q[3], q[0])
    figures["handbrake_yaw_deg"] = float(np.degrees(yaw))
    print(f"  handbrake + full lock at 60 km/h for 1.5 s: rotated {np.degrees(yaw):.0f} deg")

    # skidpad: full lock at a steady throttle
    sim.reset(np.array([0.0, 0.0, 0.0, 8.0]))
    sim.set_commands(np.array([0.45, 0.15, 0.0, 0.0]))
    sim.step_seconds(4.0 if quick else 12.0)
    v = sim.speed_mps[0]
    r = abs(v / sim.omega_radps[0, 2])
    figures["skidpad_lat_g"] = float(v * v / r / p.gravity_mps2)
    print(
        f"  steady circle: {v * 3.6:.1f} km/h on a {r:.1f} m radius, "
        f"{v * v / r:.2f} m/s^2 lateral ({figures['skidpad_lat_g']:.2f} g_Mars)"
    )
    print(f"  done in {time.perf_counter() - t0:.1f} s wall time")
    return figures


if __name__ == "__main__":
    run_demo()
