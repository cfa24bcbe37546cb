"""What the objects of a running stack mean: job phases and pods (`phases`), queues (`queues`),
`doctor`'s findings (`findings`), estimates (`estimates`).

Pure functions over Kubernetes objects as plain dicts (the API's JSON), so each rule is tested on
fixture objects shaped like real ones.
"""
