FROM python:3.11-slim
RUN useradd --create-home --uid 10001 gpuops
WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
COPY templates ./templates
RUN pip install --no-cache-dir -e .   # editable: templates/ stay beside the code
USER gpuops
ENV GPUOPS_DATA_DIR=/home/gpuops/data GPUOPS_INVENTORY=/config/inventory.yml GPUOPS_HTTP_HOST=0.0.0.0
EXPOSE 3000
# GET /healthz: 503 when this replica cannot reach Redis or its scheduler stopped ticking
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('GPUOPS_HTTP_PORT', '3000'), timeout=8)"]
CMD ["gpuops", "serve"]
