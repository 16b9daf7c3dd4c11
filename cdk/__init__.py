"""The AWS CDK app of streamlease: a stateful stack (table, queues, sink stream) and a stateless
stack (Lambdas, API, network, worker fleet, scaling, monitoring) built from constructs.

Run it through the CDK CLI from the repository root (``make synth`` / ``make deploy``); the entry
point is :mod:`cdk.app`, the only module that reads context or the environment.
"""
