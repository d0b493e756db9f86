"""The lockstep grid trainer: batched networks, per-configuration learning rates, retirement."""

import numpy as np
import torch


def test_batched_net_select_keeps_the_kept_configurations_on_their_trajectory():
    from models._lockstep import BatchedMLP, adam

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
