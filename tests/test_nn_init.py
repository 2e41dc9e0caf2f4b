"""Network initialization (NumPy orthogonal weights) and gymnax's deferred drawing imports."""

import subprocess
import sys

import numpy as np
import pytest

from rlsys.compiler.nn import orthogonal


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 2)])
def test_orthogonal_has_orthonormal_rows_or_columns_times_gain(shape):
    n_in, n_out = shape
    weight = orthogonal(np.random.default_rng(0), n_in, n_out, gain=2.0)
    assert weight.shape == shape
    small = weight @ weight.T if n_in <= n_out else weight.T @ weight
    np.testing.assert_allclose(small, 4.0 * np.eye(min(shape)), atol=1e-10)


def test_orthogonal_is_reproducible_from_the_generator_seed():
    first = orthogonal(np.random.default_rng(3), 8, 5, 1.0)
    again = orthogonal(np.random.default_rng(3), 8, 5, 1.0)
    other = orthogonal(np.random.default_rng(4), 8, 5, 1.0)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_gymnax_imports_its_drawing_modules_only_when_used():
    script = (
        "import sys\n"
        "from rlsys.envs.gymnax_env import _environment\n"
        "_environment('CartPole-v1')\n"
        "assert 'scipy.stats' not in sys.modules, 'seaborn was imported with gymnax'\n"
        "import seaborn, matplotlib.pyplot as plt\n"
        "assert len(seaborn.color_palette('cubehelix', 3)) == 3\n"
        "assert callable(plt.subplots) and sys.modules['seaborn'] is not None\n"
        "import gymnax.environments.misc.pong as pong\n"
        "assert pong.sns.color_palette is seaborn.color_palette\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
