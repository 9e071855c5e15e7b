"""The evaluation-farm daemon (`evalfarm serve`): one asyncio gRPC server per host.

Modules: config (ServerConfig), gpus (device discovery without CUDA), slots (admission
control: slots + bounded queue), cache (result cache), auth (bearer tokens), metrics
(Prometheus), service (the EvalFarm servicer), daemon (server lifecycle, drain), cli.
"""

from evalfarm.server.config import ServerConfig, ServerConfigError

__all__ = ["ServerConfig", "ServerConfigError"]
