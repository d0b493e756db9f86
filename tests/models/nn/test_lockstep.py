"""The lockstep grid trainer: batched networks, per-configuration learning rates, retirement."""

import numpy as np
import pytest
import torch


def test_batched_net_select_keeps_the_kept_configurations_on_their_trajectory():
    from models.nn.lockstep import BatchedMLP, adam

    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randn(64, 4)

    def run(net, opt, steps):
        for _ in range(steps):
            out = net(x, torch.Generator().manual_seed(1)).reshape(net.n_configs, 64, 4)
            loss = ((out - y) ** 2).mean((1, 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return opt

    def make():
        net = BatchedMLP([5, 8, 4], [0.1, 0.5, 0.2], torch.Generator().manual_seed(0))
        return net, adam(net.parameters(), net.set_learning_rates([1e-2, 1e-3, 1e-2]))

    full, opt = make()
    run(full, run(full, opt, 5), 5)
    part, opt = make()
    opt = run(part, opt, 5)
    opt = part.select_(torch.tensor([0, 2]), opt)
    run(part, opt, 5)
    assert part.n_configs == 2
    for i in range(2):
        np.testing.assert_allclose(part.layer(i)[0].detach(), full.layer(i)[0][[0, 2]].detach(), rtol=1e-5, atol=1e-6)


def test_successive_halving_keeps_the_better_half_at_every_rung():
    from models.nn.lockstep import BatchedMLP, Schedule, run_phase

    torch.manual_seed(0)
    x, y = torch.randn(32, 3), torch.randn(32, 2)
    net = BatchedMLP([3, 4, 2], [0.0] * 4, torch.Generator().manual_seed(0))
    # the held-out score is the mean output; output offsets fix the ranking: 2 best, then 0, 3, 1
    with torch.no_grad():
        net.b[-1].copy_(torch.tensor([1.0, 3.0, 0.0, 2.0])[:, None, None].expand_as(net.b[-1]) * 100)

    def loss(out, target):
        return ((out - target) ** 2).mean((1, 2))

    result = run_phase(net, [1e-4] * 4, loss, (x, y), (x, y),
                       Schedule(max_steps=10, eval_every=1, patience=None, batch_size=32, halve_every=1),
                       torch.Generator().manual_seed(1), held_score=lambda out, target: out.mean((1, 2)))
    # rung 1 (step 1): 4 -> 2 (configurations 2 and 0 stay); rung 2 (step 2): 2 -> 1 (configuration 2)
    assert result.left_at.tolist() == [2, 1, 10, 1]
    assert result.steps == 10
    # without halving every configuration trains to the end
    net2 = BatchedMLP([3, 4, 2], [0.0] * 4, torch.Generator().manual_seed(0))
    plain = run_phase(net2, [1e-4] * 4, loss, (x, y), (x, y),
                      Schedule(max_steps=10, eval_every=1, patience=None, batch_size=32),
                      torch.Generator().manual_seed(1))
    assert plain.left_at.tolist() == [10] * 4


def test_precision_resolution_and_bad_values():
    from models.nn.lockstep import cpu_has_native_bf16, resolve_precision
    from models.exceptions import InputError

    cpu = torch.device("cpu")
    assert resolve_precision("float32", cpu) is None
    assert resolve_precision("bfloat16", cpu) is torch.bfloat16
    assert resolve_precision("auto", cpu) is (torch.bfloat16 if cpu_has_native_bf16() else None)
    try:
        resolve_precision("fp8", cpu)
    except InputError as exc:
        assert exc.field == "precision" and "'fp8'" in str(exc)
    else:
        raise AssertionError("precision='fp8' was accepted")


def test_bf16_counts_as_native_only_with_matrix_units():
    from models.nn.lockstep import bf16_matrix_units

    assert bf16_matrix_units(["fpu", "avx512f", "amx_tile", "amx_bf16"])
    assert not bf16_matrix_units(["fpu", "avx512f", "avx512_bf16"])  # bf16 products ran at half float32's speed
    assert not bf16_matrix_units([])


@pytest.mark.parametrize("dropouts", [[0.1, 0.5, 0.1, 0.5], [0.0, 0.3, 0.7], [0.2]])
def test_dropout_masks_are_the_shared_draw_against_each_rate(dropouts):
    """One uniform draw per (row, unit) for every configuration: configuration k keeps a unit when its
    draw is below 1 - p_k and scales it by 1 / (1 - p_k), whether rates repeat or not."""
    from models.nn.lockstep import BatchedMLP

    net = BatchedMLP([3, 8, 2], dropouts, torch.Generator().manual_seed(0))
    u = torch.rand(50, 8, generator=torch.Generator().manual_seed(1))
    keep = 1.0 - torch.tensor(dropouts, dtype=torch.float32)[:, None, None]
    expected = (u < keep).to(torch.float32).mul_(1.0 / keep)
    got = net._dropout_mask(u, torch.float32)
    assert got.shape == (len(dropouts), 50, 8) and torch.equal(got, expected)
    for k, p in enumerate(dropouts):
        assert torch.equal(got[k] > 0, u < 1.0 - torch.tensor(p, dtype=torch.float32))


@pytest.mark.parametrize("rows", [40, 5])
@pytest.mark.parametrize("dropouts", [[0.1, 0.5, 0.1, 0.5], [0.1, 0.5, 0.5, 0.1], [0.0, 0.3, 0.7], [0.2, 0.2]])
def test_forward_is_each_network_on_its_own_with_its_dropout(dropouts, rows):
    """The batched pass (the first layer's bias inside its product with many rows, added with few; the masks
    broadcast over a period of the rates or stacked) is network k's own MLP with dropout
    ``[u < 1 - p_k] / (1 - p_k)`` of the shared draws, and its gradients are the networks' own."""
    from models.nn.lockstep import BatchedMLP

    net = BatchedMLP([3, 8, 6, 2], dropouts, torch.Generator().manual_seed(0))
    x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(2))
    out = net(x, torch.Generator().manual_seed(1))
    out.square().sum().backward()
    draws = torch.Generator().manual_seed(1)
    u = [torch.rand(rows, 8, generator=draws), torch.rand(rows, 6, generator=draws)]
    for k, p in enumerate(dropouts):
        layers = [tuple(t.detach()[k].clone().requires_grad_() for t in net.layer(i)) for i in range(3)]
        h = x @ layers[0][0] + layers[0][1]
        for i in (1, 2):
            h = torch.relu(h) * (u[i - 1] < 1.0 - torch.tensor(p)).float() / (1.0 - torch.tensor(p))
            h = h @ layers[i][0] + layers[i][1]
        torch.testing.assert_close(out[k].detach(), h.detach(), rtol=1e-5, atol=1e-6)
        h.square().sum().backward()
        scale = net.lr_scale[k]  # W = c V: the gradient on V is c times the gradient on W
        for i in range(3):
            torch.testing.assert_close(net.V[i].grad[k], layers[i][0].grad * scale, rtol=1e-4, atol=1e-6)
            torch.testing.assert_close(net.b[i].grad[k], layers[i][1].grad * scale, rtol=1e-4, atol=1e-6)


def test_bf16_autocast_trains_to_nearly_the_float32_loss():
    from models.nn.lockstep import BatchedMLP, Schedule, run_phase

    torch.manual_seed(0)
    x = torch.randn(256, 6)
    y = torch.stack([x[:, 0] * x[:, 1], torch.relu(x[:, 2])], 1)

    def loss(out, target):
        return ((out - target) ** 2).mean((1, 2))

    final = {}
    for dtype in (None, torch.bfloat16):
        net = BatchedMLP([6, 32, 2], [0.0, 0.0], torch.Generator().manual_seed(0))
        run_phase(net, [1e-2, 1e-3], loss, (x, y), (x, y),
                  Schedule(max_steps=300, eval_every=50, patience=None, batch_size=256, dtype=dtype),
                  torch.Generator().manual_seed(1))
        net.eval()
        with torch.no_grad():
            final[dtype] = loss(net(x), y)
        assert all(p.dtype == torch.float32 for p in net.parameters())
    start = float(((y - y.mean(0)) ** 2).mean())
    assert torch.all(final[None] < 0.5 * start)
    np.testing.assert_allclose(final[torch.bfloat16], final[None], rtol=0.15)
