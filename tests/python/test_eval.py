"""lingbot_map.eval against an independent numpy implementation written from the definitions:
associate.py's greedy matching, Umeyama's SVD formula (1991), ATE and evo's RPE, the depth
metrics and nearest-neighbour point-cloud metrics, on random data, to 1e-9."""

import json
import os
import subprocess

import numpy as np
import pytest

import lingbot_map.eval as ev

pytestmark = pytest.mark.skipif(not ev.available(), reason="built without Eigen / nanoflann")

TOL = dict(rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------------
# The reference implementation


def np_associate(est_t, ref_t, max_diff):
    """associate.py: all pairs closer than max_diff, smallest difference first, each once."""
    cands = sorted((abs(a - b), a, b, i, j) for i, a in enumerate(est_t)
                   for j, b in enumerate(ref_t) if abs(a - b) < max_diff)
    used_e, used_r, out = set(), set(), []
    for _, _, _, i, j in cands:
        if i not in used_e and j not in used_r:
            used_e.add(i)
            used_r.add(j)
            out.append((i, j))
    return sorted(out)


def np_umeyama(x, y, with_scale):
    """x, y [N, 3]: (c, R, t) minimising sum |c R x + t - y|^2 (Umeyama, eqs. 34-42)."""
    mx, my = x.mean(0), y.mean(0)
    var_x = np.mean(np.sum((x - mx) ** 2, axis=1))
    cov = (y - my).T @ (x - mx) / len(x)
    u, d, vt = np.linalg.svd(cov)
    s = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        s[2, 2] = -1
    r = u @ s @ vt
    c = np.trace(np.diag(d) @ s) / var_x if with_scale else 1.0
    return c, r, my - c * r @ mx


def np_stats(e):
    e = np.asarray(e)
    return dict(rmse=np.sqrt(np.mean(e ** 2)), mean=np.mean(e), median=np.median(e),
                std=np.std(e), min=np.min(e), max=np.max(e), sse=np.sum(e ** 2))


def homogeneous(p):
    out = np.tile(np.eye(4), (len(p), 1, 1))
    out[:, :3, :] = p
    return out


def np_pairs(pos, delta, unit, all_pairs):
    n = len(pos)
    if unit == "frames":
        if all_pairs:
            return [(i, i + delta) for i in range(n - delta)]
        ids = list(range(0, n, delta))
        return list(zip(ids, ids[1:]))
    steps = np.linalg.norm(np.diff(pos, axis=0), axis=1)
    path = np.concatenate([[0.0], np.cumsum(steps)])
    if all_pairs:
        out = []
        for i in range(n - 1):
            res = np.abs(path[i + 1:] - path[i] - delta)
            j = int(np.argmin(res))
            if res[j] <= 0.1 * delta:
                out.append((i, i + 1 + j))
        return out
    ids, since = [], 0.0
    for i in range(n):
        if i:
            since += steps[i - 1]
        if since >= delta:
            ids.append(i)
            since = 0.0
    return list(zip(ids, ids[1:]))


def np_trajectory(est_t, est_p, ref_t, ref_p, align, delta, unit, all_pairs, max_diff=0.02):
    m = np_associate(est_t, ref_t, max_diff)
    ei, ri = [i for i, _ in m], [j for _, j in m]
    P, Q = homogeneous(est_p[ei]), homogeneous(ref_p[ri])
    if align == "none":
        c, r, t = 1.0, np.eye(3), np.zeros(3)
    else:
        c, r, t = np_umeyama(P[:, :3, 3], Q[:, :3, 3], align == "sim3")
    A = P.copy()
    A[:, :3, :3] = r @ P[:, :3, :3]
    A[:, :3, 3] = (c * (r @ P[:, :3, 3].T)).T + t
    ate = np.linalg.norm(A[:, :3, 3] - Q[:, :3, 3], axis=1)
    et, er = [], []
    for i, j in np_pairs(A[:, :3, 3], delta, unit, all_pairs):
        E = np.linalg.inv(np.linalg.inv(Q[i]) @ Q[j]) @ (np.linalg.inv(A[i]) @ A[j])
        et.append(np.linalg.norm(E[:3, 3]))
        er.append(np.degrees(np.arccos(np.clip((np.trace(E[:3, :3]) - 1) / 2, -1, 1))))
    return dict(matches=m, scale=c, rotation=r, translation=t, ate=np_stats(ate),
                rpe_translation=np_stats(et), rpe_rotation_deg=np_stats(er), aligned=A[:, :3, 3])


def rodrigues(v):
    a = np.linalg.norm(v)
    k = v / a
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def random_case(seed, n=240):
    """A wandering camera (reference) and a drifting, noisy, rescaled estimate of it, with times
    0.03 s apart and jitter so that some estimate times lie near two reference times."""
    rng = np.random.default_rng(seed)
    ref = np.zeros((n, 3, 4))
    pos, rot = np.zeros(3), np.eye(3)
    for i in range(n):
        rot = rot @ rodrigues(rng.normal(size=3) * 0.05)
        pos = pos + rot @ np.array([0.05, 0.0, 0.02]) + rng.normal(size=3) * 0.01
        ref[i, :, :3], ref[i, :, 3] = rot, pos
    ref_t = 1000.0 + 0.03 * np.arange(n) + rng.uniform(-0.003, 0.003, n)
    s0, r0, t0 = 0.37, rodrigues(np.array([0.3, -1.1, 0.4])), np.array([1.0, -2.0, 0.5])
    keep = np.sort(rng.choice(n, size=n * 3 // 4, replace=False))
    est = np.zeros((len(keep), 3, 4))
    for k, i in enumerate(keep):
        est[k, :, :3] = r0 @ ref[i, :, :3] @ rodrigues(rng.normal(size=3) * 0.02)
        est[k, :, 3] = s0 * (r0 @ ref[i, :, 3]) + t0 + rng.normal(size=3) * 0.01 * (1 + k / n)
    est_t = ref_t[keep] + rng.uniform(-0.012, 0.012, len(keep))
    return est_t, est, ref_t, ref


def assert_stats(got, want):
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **TOL)


# ---------------------------------------------------------------------------------------------
# The tests


@pytest.mark.parametrize("align", ["sim3", "se3", "none"])
@pytest.mark.parametrize("delta,unit,all_pairs",
                         [(1, "frames", False), (5, "frames", False), (3, "frames", True),
                          (0.4, "m", False), (0.4, "m", True)])
def test_trajectory_matches_numpy(align, delta, unit, all_pairs):
    est_t, est, ref_t, ref = random_case(seed=sum(map(ord, f"{align}{delta}{unit}{all_pairs}")))
    got = ev.trajectory((est_t, est), (ref_t, ref), align=align, delta=delta, delta_unit=unit,
                        all_pairs=all_pairs)
    want = np_trajectory(est_t, est, ref_t, ref, align, delta, unit, all_pairs)
    assert [tuple(m) for m in got["matches"]] == want["matches"]
    assert got["matched"] == len(want["matches"])
    np.testing.assert_allclose(got["scale"], want["scale"], **TOL)
    np.testing.assert_allclose(got["rotation"], want["rotation"], **TOL)
    np.testing.assert_allclose(got["translation"], want["translation"], **TOL)
    np.testing.assert_allclose(got["aligned"], want["aligned"], **TOL)
    assert_stats(got["ate"], want["ate"])
    assert got["rpe_translation"]["count"] == len(
        np_pairs(want["aligned"], delta, unit, all_pairs))
    assert_stats(got["rpe_translation"], want["rpe_translation"])
    assert_stats(got["rpe_rotation_deg"], want["rpe_rotation_deg"])


def test_umeyama_matches_numpy_and_recovers_a_transform():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 3))
    r = rodrigues(np.array([0.2, 0.9, -0.4]))
    y = 1.7 * x @ r.T + np.array([3.0, -1.0, 2.0])
    s, R, t = ev.umeyama(x, y)
    np.testing.assert_allclose([s], [1.7], **TOL)
    np.testing.assert_allclose(R, r, **TOL)
    np.testing.assert_allclose(t, [3.0, -1.0, 2.0], **TOL)
    noisy = y + rng.normal(size=y.shape) * 0.1
    for with_scale in (True, False):
        got = ev.umeyama(x, noisy, with_scale)
        want = np_umeyama(x, noisy, with_scale)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, **TOL)


def test_trajectory_files_read_as_the_arrays(tmp_path):
    est_t, est, ref_t, ref = random_case(seed=11, n=60)

    def quat(r):  # (x, y, z, w) of a rotation matrix, w >= 0 branch suffices for these
        w = np.sqrt(max(1 + np.trace(r), 1e-12)) / 2
        return np.array([(r[2, 1] - r[1, 2]) / (4 * w), (r[0, 2] - r[2, 0]) / (4 * w),
                         (r[1, 0] - r[0, 1]) / (4 * w), w])

    with open(tmp_path / "ref.txt", "w") as f:
        f.write("# timestamp tx ty tz qx qy qz qw\n")
        for t, p in zip(ref_t, ref):
            f.write(" ".join(f"{v:.17g}" for v in [t, *p[:, 3], *quat(p[:, :3])]) + "\n")
    with open(tmp_path / "est.kitti", "w") as f:
        for p in est:
            f.write(" ".join(f"{v:.17g}" for v in p.ravel()) + "\n")
    t, p, indexed = ev.read_trajectory(tmp_path / "ref.txt")
    assert not indexed
    np.testing.assert_array_equal(t, ref_t)
    np.testing.assert_allclose(p, ref, atol=1e-9)
    t, p, indexed = ev.read_trajectory(tmp_path / "est.kitti")
    assert indexed
    np.testing.assert_array_equal(t, np.arange(len(est)))
    np.testing.assert_array_equal(p, est)
    with open(tmp_path / "times.txt", "w") as f:
        f.write("# rgb.txt style\n" + "".join(f"{x:.17g} rgb/{i}.png\n" for i, x in enumerate(est_t)))
    got = ev.trajectory(tmp_path / "est.kitti", tmp_path / "ref.txt",
                        estimate_times=tmp_path / "times.txt")
    want = np_trajectory(est_t, est, ref_t, ref, "sim3", 1, "frames", False)
    assert_stats(got["ate"], {k: v for k, v in want["ate"].items()})


@pytest.mark.parametrize("scaling", ["median", "lsq", "none"])
@pytest.mark.parametrize("per_frame", [False, True])
def test_depth_matches_numpy(scaling, per_frame):
    rng = np.random.default_rng(5)
    gt = rng.uniform(0.5, 10, size=(4, 9, 11))
    gt[rng.random(gt.shape) < 0.2] = 0  # holes
    pred = (gt * 0.3 * rng.uniform(0.8, 1.25, size=gt.shape)).astype(np.float32)
    pred[0, 0, :3] = [np.nan, -1, 0]
    gt = gt.astype(np.float32)
    lo, hi = 0.7, 9.0

    def metrics(p, g):
        valid = np.isfinite(g) & (g > 0) & np.isfinite(p) & (p > 0) & (g >= lo) & (g <= hi)
        p, g = p[valid].astype(np.float64), g[valid].astype(np.float64)
        s = {"median": np.median(g) / np.median(p), "lsq": np.sum(p * g) / np.sum(p * p),
             "none": 1.0}[scaling]
        p = s * p
        r = np.maximum(p / g, g / p)
        return dict(abs_rel=np.mean(np.abs(p - g) / g), sq_rel=np.mean((p - g) ** 2 / g),
                    rmse=np.sqrt(np.mean((p - g) ** 2)),
                    log_rmse=np.sqrt(np.mean((np.log(p) - np.log(g)) ** 2)),
                    delta1=np.mean(r < 1.25), delta2=np.mean(r < 1.25 ** 2),
                    delta3=np.mean(r < 1.25 ** 3), scale=s)

    if per_frame:
        frames = [metrics(pred[i], gt[i]) for i in range(len(gt))]
        want = {k: np.mean([f[k] for f in frames]) for k in frames[0]}
    else:
        want = metrics(pred, gt)
    got = ev.depth(pred, gt, scaling=scaling, per_frame=per_frame, min_depth=lo, max_depth=hi)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **TOL)


def test_point_cloud_matches_brute_force(tmp_path):
    rng = np.random.default_rng(9)
    ref = rng.uniform(-1, 1, size=(400, 3))
    pred = np.concatenate([ref[:250] + rng.normal(size=(250, 3)) * 0.03,
                           rng.uniform(-1.5, 1.5, size=(60, 3))])
    d = np.linalg.norm(pred[:, None, :] - ref[None, :, :], axis=2)
    acc, comp = d.min(1), d.min(0)
    th = 0.05
    p, r = np.mean(acc < th), np.mean(comp < th)
    want = dict(accuracy=acc.mean(), completeness=comp.mean(), accuracy_median=np.median(acc),
                completeness_median=np.median(comp), chamfer=(acc.mean() + comp.mean()) / 2,
                precision=p, recall=r, f1=2 * p * r / (p + r))
    got = ev.point_cloud(pred, ref, threshold=th)
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, err_msg=k, **TOL)
    # The same through a binary PLY.
    with open(tmp_path / "p.ply", "wb") as f:
        f.write(f"ply\nformat binary_little_endian 1.0\nelement vertex {len(pred)}\n"
                "property double x\nproperty double y\nproperty double z\nend_header\n".encode())
        f.write(pred.astype("<f8").tobytes())
    np.testing.assert_array_equal(ev.read_ply(tmp_path / "p.ply"), pred)
    assert ev.point_cloud(tmp_path / "p.ply", ref, threshold=th)["f1"] == pytest.approx(
        want["f1"], rel=1e-12)


def test_bad_input_raises():
    est_t, est, ref_t, ref = random_case(seed=1, n=20)
    with pytest.raises(ValueError, match="too few matches"):
        ev.trajectory((est_t + 100, est), (ref_t, ref))
    with pytest.raises(ValueError, match="mismatched lengths"):
        ev.trajectory(est[:5], ref[:6])
    with pytest.raises(ValueError, match="poses must be"):
        ev.trajectory(est[:, :2], ref)
    with pytest.raises(FileNotFoundError):
        ev.trajectory("/nonexistent/traj.txt", ref)
    with pytest.raises(ValueError, match="differ in size"):
        ev.depth(np.ones((2, 3)), np.ones((3, 2)))
    # The option names are the CLI's, checked in one place for both.
    with pytest.raises(ValueError, match="align must be 'sim3', 'se3' or 'none', got 'sim2'"):
        ev.trajectory(est, ref, align="sim2")
    with pytest.raises(ValueError, match="delta_unit must be 'frames' or 'm', got 'km'"):
        ev.trajectory(est, ref, delta_unit="km")
    with pytest.raises(ValueError, match="scaling must be 'median', 'lsq' or 'none', got 'mean'"):
        ev.depth(np.ones((2, 3)), np.ones((2, 3)), scaling="mean")


def test_cli_json_equals_python(tmp_path, cli):
    est_t, est, ref_t, ref = random_case(seed=21, n=50)
    for name, t, poses in (("est.txt", est_t, est), ("ref.txt", ref_t, ref)):
        with open(tmp_path / name, "w") as f:
            for x, p in zip(t, poses):
                r = p[:, :3]
                w = np.sqrt(max(1 + np.trace(r), 1e-12)) / 2
                q = [(r[2, 1] - r[1, 2]) / (4 * w), (r[0, 2] - r[2, 0]) / (4 * w),
                     (r[1, 0] - r[0, 1]) / (4 * w), w]
                f.write(" ".join(f"{v:.17g}" for v in [x, *p[:, 3], *q]) + "\n")
    out = subprocess.run([cli, "eval", str(tmp_path / "est.txt"), "--gt",
                          str(tmp_path / "ref.txt"), "--delta", "2", "--json", "-"],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)["trajectory"]
    py = ev.trajectory(tmp_path / "est.txt", tmp_path / "ref.txt", delta=2)
    for key in ("ate", "rpe_translation", "rpe_rotation_deg"):
        assert got[key] == pytest.approx({k: py[key][k] for k in got[key]}, rel=1e-12)
