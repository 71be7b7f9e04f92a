"""The lab: a GPU cloud on one machine made of real parts (network namespaces with sshd and
dockerd, a registry, moto S3) plus HTTP fakes of the Lambda and Vast APIs, for tests and demos."""
