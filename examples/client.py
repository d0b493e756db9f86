"""A localisation back end's view of lmve: batch queries, regions for a map, a geofence check.

    python examples/client.py --url http://127.0.0.1:8000 [--api-key KEY]

Uses the synthetic generator for example fingerprints; a real back end sends its own RSSI
vectors in the bundle's feature order (GET /model lists it).
"""

from __future__ import annotations

import argparse

import httpx


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default=None)
    args = p.parse_args()
    headers = {"X-API-Key": args.api_key} if args.api_key else {}

    from training.data.synthetic import make_localization

    X, Y, *_ = make_localization(5, seed=42)
    with httpx.Client(base_url=args.url, headers=headers, timeout=10.0) as api:
        model = api.get("/model").raise_for_status().json()
        print(f"serving {model['version']} ({model['dataset'].get('name')}), primary {model['primary_method']}, "
              f"features {model['d']}, coverage {model['coverage']}")

        r = api.post("/predict-region", json={"features": X.tolist(), "coverage": 0.95, "boundary_points": 32})
        if r.status_code != 200:  # problem+json names the field, the expected and the received
            raise SystemExit(f"{r.status_code}: {r.json()['detail']}")
        body = r.json()
        if body["fallback"]:
            print(f"note: served by {body['method']} ({body['fallback_reason']})")
        for reg, truth in zip(body["regions"], Y):
            cx, cy = reg["center"]
            a, b = reg["semi_axes"]
            print(f"estimate ({cx:6.2f}, {cy:6.2f}) m, 95% ellipse {a:.2f} x {b:.2f} m at "
                  f"{reg['orientation']:+.2f} rad, area {reg['volume']:.1f} m2; truth ({truth[0]:.2f}, {truth[1]:.2f})")

        # geofence: is the device possibly inside the room whose door is at (30, 12)?
        door = [[30.0, 12.0]] * len(X)
        for res in api.post("/contains", json={"features": X.tolist(), "points": door}).json()["results"]:
            print(f"door inside 90% region: {res['inside']!s:5}  distance {res['distance']:.2f}  "
                  f"p-value {res['p_value']:.3f}")


if __name__ == "__main__":
    main()
