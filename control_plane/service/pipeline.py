"""The Capabilities, SetForwardingPipelineConfig and GetForwardingPipelineConfig RPCs."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import grpc
from p4.v1 import p4runtime_pb2

from control_plane.p4info import PipelineRefused, Schema
from control_plane.service.base import ServiceState
from control_plane.service.errors import Code, P4RuntimeError, unary

PipelineAction = p4runtime_pb2.SetForwardingPipelineConfigRequest


class ForwardingPipelineRpcs(ServiceState):
    """Capabilities and the forwarding pipeline: verify, save, commit and read back a P4Info."""

    @unary
    def Capabilities(self, request: p4runtime_pb2.CapabilitiesRequest, context: grpc.ServicerContext
                     ) -> p4runtime_pb2.CapabilitiesResponse:
        try:
            api = version("p4runtime")
        except PackageNotFoundError:
            api = "1.4.1"
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api)

    @unary
    def SetForwardingPipelineConfig(self, request: PipelineAction, context: grpc.ServicerContext
                                    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        self._check_device(request.device_id, request.role)
        self._check_primary(request)
        action = request.action
        with self._lock:
            if action == PipelineAction.COMMIT:
                if request.HasField("config"):
                    raise P4RuntimeError(Code.INVALID_ARGUMENT, "COMMIT takes no config")
                if not self._saved:
                    raise P4RuntimeError(Code.NOT_FOUND, "no saved config (VERIFY_AND_SAVE first)")
                # Writes since the save already went to the data plane: nothing to replay.
                self._saved = False
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            if action not in (PipelineAction.VERIFY, PipelineAction.VERIFY_AND_SAVE,
                              PipelineAction.VERIFY_AND_COMMIT, PipelineAction.RECONCILE_AND_COMMIT):
                raise P4RuntimeError(Code.INVALID_ARGUMENT, f"unsupported action {action}")
            if not request.HasField("config") or not request.config.HasField("p4info"):
                raise P4RuntimeError(Code.INVALID_ARGUMENT, "config with a p4info is required")
            try:
                schema = Schema(request.config.p4info, self.pipeline.queue.config)
            except PipelineRefused as e:
                raise P4RuntimeError(Code.INVALID_ARGUMENT, str(e)) from None
            if action == PipelineAction.VERIFY:
                return p4runtime_pb2.SetForwardingPipelineConfigResponse()
            self._schema = schema
            self._config = p4runtime_pb2.ForwardingPipelineConfig()
            self._config.CopyFrom(request.config)
            self._saved = action == PipelineAction.VERIFY_AND_SAVE
            if action == PipelineAction.VERIFY_AND_COMMIT:
                self._clear_forwarding_state()
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _clear_forwarding_state(self) -> None:
        """What a fresh pipeline starts with: no routes, no drops, the startup config."""
        sw = self.switch
        with self.pipeline.lock:
            for prefix, _ in sw.table.entries():
                sw.table.delete(prefix)
            sw.impairment.drop_prob = {}
            q = self.pipeline.queue
            q.mode, q.threshold, q.congestion_threshold, q.cluster_quota, q.feedback = self._startup
            (updates, update_default), (pulls, pull_default) = (
                self._startup_acl["update_source"], self._startup_acl["pull_source"])
            self.pipeline.acl.configure(updates, pulls, update_default_permit=update_default,
                                        pull_default_permit=pull_default)
        self._util_entries.clear()
        self._util_default = None

    @unary
    def GetForwardingPipelineConfig(self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest,
                                    context: grpc.ServicerContext
                                    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        self._check_device(request.device_id)
        rep = p4runtime_pb2.GetForwardingPipelineConfigResponse()
        with self._lock:
            if self._config is None:
                return rep  # config unset: no pipeline yet (spec §13)
            kind = request.response_type
            Req = p4runtime_pb2.GetForwardingPipelineConfigRequest
            if self._config.HasField("cookie"):
                rep.config.cookie.CopyFrom(self._config.cookie)
            if kind in (Req.ALL, Req.P4INFO_AND_COOKIE):
                rep.config.p4info.CopyFrom(self._config.p4info)
            if kind in (Req.ALL, Req.DEVICE_CONFIG_AND_COOKIE):
                rep.config.p4_device_config = self._config.p4_device_config
            if kind == Req.COOKIE_ONLY and not self._config.HasField("cookie"):
                rep.config.SetInParent()
        return rep
