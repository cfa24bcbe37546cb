"""Pure domain facts: instance types, what a node offers a job and what a job demands, names.

No Pulumi resources, no boto3, nothing from config, components or planes (a fitness test holds it).
"""
