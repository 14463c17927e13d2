"""Large workloads (issue 48 and before): Ray and local batch tagging, 300k/1M records, a
1.5M-heading vocabulary, memory."""
