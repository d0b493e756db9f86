import math

import numpy as np
import pytest
from scipy.special import gamma

from models import geometry
from models.exceptions import InputError


def random_spd(rng, N, n):
    A = rng.normal(size=(N, n, n))
    return A @ np.transpose(A, (0, 2, 1)) + 0.1 * np.eye(n)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_unit_ball_volume_closed_form(n):
    assert geometry.unit_ball_volume(n) == pytest.approx(math.pi ** (n / 2) / gamma(n / 2 + 1), rel=1e-12)


def test_ellipse_area_is_pi_ab():
    # semi-axes 3 and 0.5, rotated by 30 degrees
    a, b, t = 3.0, 0.5, math.radians(30)
    Rm = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    C = Rm @ np.diag([a**2, b**2]) @ Rm.T
    assert geometry.volume(C)[0] == pytest.approx(math.pi * a * b, rel=1e-12)
    assert geometry.volume(C, "paper")[0] == pytest.approx(a * b, rel=1e-12)
    axes, dirs = geometry.axes(C)
    np.testing.assert_allclose(axes[0], [a, b], rtol=1e-12)
    assert geometry.orientation_2d(C)[0] == pytest.approx(t, abs=1e-12)


def test_ellipsoid_volume_3d_is_four_thirds_pi_abc():
    C = np.diag([4.0, 9.0, 0.25])
    assert geometry.volume(C)[0] == pytest.approx(4 / 3 * math.pi * 2 * 3 * 0.5, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3])
def test_mahalanobis_matches_explicit_inverse(n):
    rng = np.random.default_rng(n)
    C = random_spd(rng, 50, n)
    R = rng.normal(size=(50, n))
    expected = np.einsum("ni,nij,nj->n", R, np.linalg.inv(C), R)
    np.testing.assert_allclose(geometry.mahalanobis(R, C), expected, rtol=1e-10)
    # one shared shape broadcast over rows
    np.testing.assert_allclose(
        geometry.mahalanobis(R, C[0]), np.einsum("ni,ij,nj->n", R, np.linalg.inv(C[0]), R), rtol=1e-10
    )


@pytest.mark.parametrize("n", [2, 3])
def test_boundary_points_lie_on_the_ellipsoid(n):
    rng = np.random.default_rng(10 + n)
    C = random_spd(rng, 5, n)
    c = rng.normal(size=(5, n))
    P = geometry.boundary_points(c, C, k=40)
    M = geometry.mahalanobis((P - c[:, None]).reshape(-1, n), np.repeat(C, 40, axis=0))
    np.testing.assert_allclose(M, 1.0, rtol=1e-10)
    # shrunk a hair: inside; grown a hair: outside
    inner = c[:, None] + 0.99 * (P - c[:, None])
    outer = c[:, None] + 1.01 * (P - c[:, None])
    assert geometry.contains(inner.reshape(-1, n), np.repeat(c, 40, 0), np.repeat(C, 40, 0)).all()
    assert not geometry.contains(outer.reshape(-1, n), np.repeat(c, 40, 0), np.repeat(C, 40, 0)).any()


def test_closed_polygon_repeats_first_point():
    P = geometry.boundary_points(np.zeros((1, 2)), np.eye(2)[None], k=8, closed=True)
    assert P.shape == (1, 9, 2)
    np.testing.assert_array_equal(P[0, 0], P[0, -1])


def test_scale_multiplies_volume_by_factor_to_the_n_over_2():
    rng = np.random.default_rng(3)
    C = random_spd(rng, 4, 3)
    np.testing.assert_allclose(geometry.volume(geometry.scale(C, 4.0)), 8.0 * geometry.volume(C), rtol=1e-12)


def test_infinite_shape_is_the_whole_space():
    C = geometry.scale(np.eye(2)[None], math.inf)
    assert geometry.volume(C)[0] == math.inf
    assert geometry.contains(np.array([[1e9, -1e9]]), np.zeros((1, 2)), C).all()
    with pytest.raises(InputError, match="unbounded"):
        geometry.boundary_points(np.zeros((1, 2)), C)


def test_bad_inputs_are_named():
    with pytest.raises(InputError, match=r"shapes must have shape \(N, n, n\)"):
        geometry.volume(np.ones((2, 3)))
    with pytest.raises(InputError, match="n=3 columns but shapes are 2x2"):
        geometry.mahalanobis(np.ones((1, 3)), np.eye(2))
    with pytest.raises(InputError, match="positive"):
        geometry.scale(np.eye(2), -1.0)
    with pytest.raises(InputError, match="n = 2 or 3"):
        geometry.boundary_points(np.zeros((1, 4)), np.eye(4)[None])


def test_2x2_closed_forms_match_the_general_linear_algebra():
    rng = np.random.default_rng(11)
    C = random_spd(rng, 200, 2)
    C[0] = np.diag([1e-6, 1e6])  # very elongated: the small semi-axis must not cancel away
    C[1] = np.array([[2.0, 0.0], [0.0, 5.0]])  # major axis along y: orientation pi/2
    R = rng.normal(size=(200, 2))
    np.testing.assert_allclose(geometry.sqrt_det(C), np.sqrt(np.linalg.det(C)), rtol=1e-12)
    np.testing.assert_allclose(geometry.mahalanobis(R, C), np.einsum("ni,nij,nj->n", R, np.linalg.inv(C), R),
                               rtol=1e-9)
    area, semi, angle = geometry.ellipse_2d(C)
    w = np.linalg.eigvalsh(C)[:, ::-1]
    np.testing.assert_allclose(semi, np.sqrt(w), rtol=1e-9)
    np.testing.assert_allclose(area, math.pi * np.sqrt(w).prod(1), rtol=1e-12)
    np.testing.assert_allclose(angle, geometry.orientation_2d(C), atol=1e-12)
    assert angle[1] == pytest.approx(math.pi / 2)
    semi2, directions = geometry.axes(C)
    np.testing.assert_allclose(directions @ (semi2[:, :, None] ** 2 * np.transpose(directions, (0, 2, 1))), C,
                               rtol=1e-9, atol=1e-9)


def test_one_shapes_closed_form_is_the_batchs_to_the_bit():
    rng = np.random.default_rng(12)
    C = random_spd(rng, 300, 2) * np.exp(rng.uniform(-30, 30, size=(300, 1, 1)))  # scales from 1e-13 to 1e13
    C[0] = np.diag([1e-6, 1e6])
    C[1] = np.array([[2.0, 0.0], [0.0, 5.0]])
    C[2] = np.array([[3.0, 0.0], [0.0, 3.0]])  # a circle: orientation 0
    area, semi, angle = geometry.ellipse_2d(C)
    for i in range(len(C)):
        one = geometry.ellipse_2d(C[i:i + 1])
        assert one[0].shape == (1,) and one[1].shape == (1, 2) and one[2].shape == (1,)
        assert one[0][0] == area[i] and np.array_equal(one[1][0], semi[i]) and one[2][0] == angle[i], i
    for bad in ([[1.0, 2.0], [2.0, 1.0]], [[-1.0, 0.0], [0.0, -1.0]], [[np.nan, 0.0], [0.0, 1.0]],
                [[np.inf, 0.0], [0.0, 1.0]], [[1.0, np.nan], [np.nan, 1.0]]):
        with pytest.raises(InputError, match="positive-definite"):
            geometry.ellipse_2d(np.array([bad]))


def test_2x2_fast_paths_still_refuse_what_the_general_path_refuses():
    bad = np.array([[[1.0, 2.0], [2.0, 1.0]]])  # indefinite
    with pytest.raises(np.linalg.LinAlgError):
        geometry.sqrt_det(bad)
    with pytest.raises(InputError, match="positive-definite"):
        geometry.ellipse_2d(bad)
    with pytest.raises(InputError, match="positive"):
        geometry.scale(np.eye(2), float("nan"))
    assert geometry.sqrt_det(np.array([[[1.0, 0.0], [0.0, np.inf]]]))[0] == math.inf


def test_2x2_spd_check_does_not_overflow_on_large_finite_shapes():
    """Huge but finite determinants: the closed form still applies, silently (no overflowing sum)."""
    import warnings

    C = np.repeat(np.diag([1e153, 1e153])[None], 3, axis=0)  # det 1e306 each; their sum overflows
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(geometry.sqrt_det(C), 1e153, rtol=1e-12)
        area, semi, _ = geometry.ellipse_2d(C)
    np.testing.assert_allclose(semi, np.sqrt(1e153), rtol=1e-12)
