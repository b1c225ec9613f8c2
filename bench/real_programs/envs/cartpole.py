"""gym's CartPole-v1 in plain Python, for the reinforcement-learning programs (gym is not a
dependency): the same constants, Euler integration, termination at +-2.4 m or +-12 degrees
and truncation at 500 steps. The programs import it as `envs.cartpole` (their folder is
first on sys.path, under `python` as under `neuraldbg run`)."""
import math


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    max_steps = 500
    n_actions = 2

    def __init__(self, rng):
        """rng: a random.Random, for the starting states."""
        self.rng = rng
        self.state = None
        self.t = 0

    def reset(self):
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.t = 0
        return list(self.state)

    def step(self, action):
        """(state, reward, terminated, truncated)"""
        x, x_dot, theta, theta_dot = self.state
        force = self.force_mag if action == 1 else -self.force_mag
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + polemass_length * theta_dot ** 2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta ** 2 / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.t += 1
        terminated = abs(x) > self.x_threshold or abs(theta) > self.theta_threshold
        truncated = self.t >= self.max_steps
        return list(self.state), 1.0, terminated, truncated
