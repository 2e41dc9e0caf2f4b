"""Atari games through gymnasium (`gymnasium:ALE/Pong-v5`), preprocessed as RL code expects.

ale-py's games register with gymnasium only when asked (`gym.register_envs(ale_py)`), and
raw frames (210x160 RGB, every 4th frame of the emulator) are not what agents train on. As
SB3's `make_atari_env` and CleanRL's `ppo_atari.py` do, each game is made with the
emulator's own frame skip off and wrapped in gymnasium's `AtariPreprocessing` (up to 30
no-op steps at reset; an action repeated over 4 frames, the last two max-pooled; 84x84
grayscale frames, kept as bytes, which the networks scale to [0, 1]) and a stack of the
last 4 such frames. Unlike those scripts, rewards are not clipped and a lost life does not
end the episode, so metrics report the game's score. Version-5 games keep their sticky
actions (repeat probability 0.25); ale-py's older ids (`gymnasium:PongNoFrameskip-v4`, as
many published agents used) have none.
"""

from __future__ import annotations

from rlsys.compiler.errors import RecurrenceError

NAMESPACE = "ALE/"
FRAME_SKIP = 4  # emulator frames per agent step
FRAME_STACK = 4  # agent steps per observation
INSTALL = "pip install 'rlsys[atari]'"


def is_atari(env_id: str) -> bool:
    """`ALE/<Game>-v5`, or one of ale-py's older ids (`PongNoFrameskip-v4`, `Breakout-v4`),
    which exist in gymnasium's registry only once ale-py registered them."""
    if env_id.startswith(NAMESPACE):
        return True
    import gymnasium as gym

    if env_id not in gym.registry:
        try:
            import ale_py
        except ImportError:
            return False  # then gymnasium says the id is unknown, and the hint names ALE/
        gym.register_envs(ale_py)
    spec = gym.registry.get(env_id)
    return spec is not None and str(spec.entry_point).startswith("ale_py")


def register() -> None:
    """Make ale-py's games known to gymnasium (idempotent)."""
    import gymnasium as gym

    try:
        import ale_py
    except ImportError:
        raise RecurrenceError(f"Atari games need ale-py: {INSTALL}") from None
    gym.register_envs(ale_py)
    # Not the emulator's banner ("[Powered by Stella]"), printed on stdout by the first game a
    # process makes, even under --quiet; its warnings and errors still show.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)


def make(env_id: str):
    """One preprocessed game (`register()` first)."""
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env = gym.make(env_id, frameskip=1)  # AtariPreprocessing skips frames itself
    try:
        # Frames stay bytes (0-255): the rollout keeps them so, the networks scale them.
        env = AtariPreprocessing(env, frame_skip=FRAME_SKIP, scale_obs=False)
    except gym.error.DependencyNotInstalled:  # it resizes frames with OpenCV
        env.close()
        raise RecurrenceError(f"Atari preprocessing needs OpenCV: {INSTALL}") from None
    return FrameStackObservation(env, FRAME_STACK)


def episode_limit(env_id: str) -> int:
    """Agent steps in the longest episode: the game's frame limit over the frame skip."""
    import gymnasium as gym

    frames = gym.spec(env_id).kwargs.get("max_num_frames_per_episode") or 108_000
    return int(frames) // FRAME_SKIP
