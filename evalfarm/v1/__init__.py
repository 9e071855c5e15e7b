"""Generated gRPC/protobuf modules for the evalfarm.v1 wire contract.

Do not edit evalfarm_pb2*.py by hand: change protos/evalfarm/v1/evalfarm.proto and run
scripts/gen_protos.sh (tests/service/test_protos.py fails when they are stale).
"""
